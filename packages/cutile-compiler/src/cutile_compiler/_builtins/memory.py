"""The DSL functions that load tiles of tensors and count a partition's tiles."""

from __future__ import annotations

import ast
from typing import Any, TYPE_CHECKING

from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins._base import _hint_attrs, _index, _partition, _static_int, _static_shape, _tensor_arg, builtin
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import MemoryOp
from cutile_compiler._types import PartitionType, TensorType

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


@builtin
def load_tile_like(fe: FrontEnd, node: ast.Call, tensor: Any, like: Any, latency: int | None = None,
                   allow_tma: bool | None = None) -> Value:
    """The tile of ``tensor`` at the position and shape of this block's tile of ``like``
    (a Mut tensor). Elements past the end of ``tensor`` read as zero."""
    source = _tensor_arg(fe, tensor, node, "load_tile_like's first argument")
    target = _tensor_arg(fe, like, node, "load_tile_like's second argument")
    if target.type.tile_shape is None:  # type: ignore[attr-defined]
        raise fe.type_error("load_tile_like's second argument must be a Mut tensor (it decides the tile)", node)
    tile_shape = target.type.tile_shape  # type: ignore[attr-defined]
    source_tile = source.type.tile_shape  # type: ignore[attr-defined]
    if source.type.map_shape is not None and not fe.unsafe:  # type: ignore[attr-defined]
        from cutile_compiler._mapped import no_own_tile  # (its schedule, not the block id, gives its tiles)

        raise no_own_tile(fe, source)
    if source.type.mutable and source_tile != tile_shape and not fe.unsafe:  # type: ignore[attr-defined]
        raise fe.type_error(
            f"load_tile_like: {source.type} is written by the blocks in tiles of {list(source_tile or ())}; reading "
            f"it in tiles of {list(tile_shape)} would read other blocks' tiles while they write them (a race). "
            "Read a Mut tensor through its own tile (.load()), or use @cutile.entry(unsafe=True)", node)
    if source.type.rank != len(tile_shape):  # type: ignore[attr-defined]
        raise fe.type_error(
            f"load_tile_like: {source.type} has rank {source.type.rank}, the tile of {target.type} rank {len(tile_shape)}", node)  # type: ignore[attr-defined]
    partition = fe.op(MemoryOp.MAKE_PARTITION, [source], {"tile_shape": tile_shape, "padding": "zero"}, node=node).result
    return fe.op(MemoryOp.TILE_LOAD, [partition, *fe.own_index(target)], _hint_attrs(fe, node, latency, allow_tma),
                 node=node).result


@builtin
def load(fe: FrontEnd, node: ast.Call, tensor: Any, index: Any, shape: Any, padding: Any = "zero",
         latency: int | None = None, allow_tma: bool | None = None) -> Value:
    """The tile of ``shape`` at tile coordinates ``index`` of ``tensor`` (elements past
    the end read as ``padding``: zero, neg_zero, nan, pos_inf or neg_inf).
    ``latency`` (1 to 10) and ``allow_tma`` are hints to tileiras."""
    source = _tensor_arg(fe, tensor, node, "load's tensor")
    partition = _partition(fe, source, shape, padding, node)
    return fe.op(MemoryOp.TILE_LOAD, [partition, *_index(fe, index, node)],
                 _hint_attrs(fe, node, latency, allow_tma), node=node).result


def load_at(fe: FrontEnd, node: ast.Call, tensor: Value, at: Any, shape: Any, padding: Any, latency: Any,
            allow_tma: Any) -> Value:
    """``x.load(at=(e0, ...), shape=(...))``: the tile of ``shape`` whose first element
    is at element coordinates ``at`` (run-time integers, negative allowed); every
    element outside the tensor reads ``padding``. Only read-only tensors, in safe kernels."""
    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    if ttype.mutable and not fe.unsafe:
        raise fe.type_error(
            f"load(at=...) of a Mut tensor in a safe kernel: the blocks write {ttype} tile by tile, and a tile at "
            "other element coordinates overlaps other blocks' tiles while they write them (a race). A safe kernel "
            "reads a Mut tensor only through its own tile (.load()); read other places of read-only tensors, or "
            "use @cutile.entry(unsafe=True)", node)
    tile_shape = _static_shape(fe, shape, node, "load shape")
    items = at if isinstance(at, tuple) else (at,)
    starts = []
    for axis, item in enumerate(items):
        start = fe.to_tile(item, node, like=dt.i32 if isinstance(item, int) and -2**31 <= item < 2**31 else None,
                           what=f"load's at= coordinate {axis}")
        starts.append(start)
    # the coordinates' count and kinds, the shape's rank and the padding are the op's rules (`LoadAt`)
    attrs = {"shape": tile_shape, "padding": padding, **_hint_attrs(fe, node, latency, allow_tma)}
    return fe.op(MemoryOp.LOAD_AT, [tensor, *starts], attrs, node=node).result


@builtin
def num_tiles(fe: FrontEnd, node: ast.Call, partition: Any, axis: int) -> Value:
    """How many tiles a partition has along ``axis`` (a partial last tile counts)."""
    if not (isinstance(partition, Value) and isinstance(partition.type, PartitionType)):
        raise fe.type_error(f"num_tiles takes a partition, got {fe.describe(partition)}", node)
    return fe.op(MemoryOp.NUM_TILES, [partition], {"axis": _static_int(fe, axis, node, "axis")}, node=node).result
