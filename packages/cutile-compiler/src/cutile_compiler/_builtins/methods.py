"""The attributes and methods of tile, tensor and partition values in kernels
(``t.sum(axis)``, ``z.store(t)``, ``p.load(index)``)."""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Sequence
from typing import Any, TYPE_CHECKING

from cutile_compiler._builtins._base import _convert_value, _hint_attrs, _index, _partition, bind_call, Builtin, builtin, Impl, user_signature
from cutile_compiler._builtins.elementwise import astype, bitcast
from cutile_compiler._builtins.memory import load, load_at, num_tiles
from cutile_compiler._builtins.pointer import _own_atomic, _own_atomic_cas, _own_values
from cutile_compiler._builtins.reduction import argmax, argmin, cumprod, cumsum, max_, min_, prod, sum_
from cutile_compiler._builtins.shape import broadcast_to, expand_dims, extract, flip, insert, permute, reshape, transpose
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import MemoryOp
from cutile_compiler._mapped import mapped_load, mapped_store, tensor_num_tiles, tensor_tiles, tensor_tiles_with
from cutile_compiler._mapped import tensor_tiles_within
from cutile_compiler._opdefs.memory import TILE_ATOMIC_MODES
from cutile_compiler._opdefs.pointer import RMW_MODES
from cutile_compiler._types import PartitionType, TensorType, TileType

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


class BoundMethod:
    """``value.method`` waiting for its call."""

    def __init__(self, name: str, receiver: Value, impl: Impl) -> None:
        self.__name__ = name
        self.receiver = receiver
        self.impl = impl

    def emit(self, fe: FrontEnd, node: ast.Call, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(self.impl, _BuiltinMethod):
            return self.impl.builtin.emit(fe, node, [self.receiver, *args], kwargs)
        bind_call(fe, node, f".{self.__name__}", _method_signature(self.impl), args, kwargs)
        return self.impl(fe, node, self.receiver, *args, **kwargs)


def _tensor_load(fe: FrontEnd, node: ast.Call, tensor: Value, index: Any = None, shape: Any = None, padding: Any = "zero",
                 latency: Any = None, allow_tma: Any = None, at: Any = None) -> Value:
    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    if at is not None:
        if index is not None:
            raise fe.type_error("load() takes either index= (tile coordinates) or at= (element coordinates), "
                                "not both", node)
        if shape is None:
            raise fe.type_error("load(at=...) needs shape=: the tile read from those element coordinates", node)
        return load_at(fe, node, tensor, at, shape, padding, latency, allow_tma)
    if ttype.map_shape is not None and shape is None:  # a mapped partition's tile at an index of its schedule
        return mapped_load(fe, node, tensor, index, _hint_attrs(fe, node, latency, allow_tma))
    if index is None and shape is None:
        if ttype.tile_shape is None:
            raise fe.type_error("load() without an index loads a Mut tensor's own tile; this tensor is read-only: "
                                "use load(index=..., shape=...) or .partition(...)", node)
        return fe.op(MemoryOp.TILE_LOAD, [fe.own_partition(tensor, node), *fe.own_index(tensor)],
                     _hint_attrs(fe, node, latency, allow_tma), node=node).result
    if index is None or shape is None:
        raise fe.type_error("load() takes both index= and shape= (or neither, for a Mut tensor's own tile)", node)
    result: Value = load.impl(fe, node, tensor, index, shape, padding, latency, allow_tma)
    return result


def _tensor_store(fe: FrontEnd, node: ast.Call, tensor: Value, value: Any, index: Any = None) -> None:
    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    if ttype.map_shape is not None:
        return mapped_store(fe, node, tensor, value, index)
    if index is not None:
        raise fe.type_error(f"{tensor.name}.store(tile, index): only a mapped partition is stored at an index in a "
                            f"safe kernel; '{tensor.name}' is partitioned one tile per block: "
                            f"{tensor.name}.store(tile) writes the block's own tile", node)
    (tile,) = _own_values(fe, node, tensor, [(value, "value")], "store")
    fe.op(MemoryOp.TILE_STORE, [fe.own_partition(tensor, node), *fe.own_index(tensor), tile], node=node)
    return None


def _tensor_partition(fe: FrontEnd, node: ast.Call, tensor: Value, shape: Any, padding: Any = "zero") -> Value:
    return _partition(fe, tensor, shape, padding, node)  # which refuses a Mut tensor's in a safe kernel


def _partition_load(fe: FrontEnd, node: ast.Call, partition: Value, index: Any, latency: Any = None,
                    allow_tma: Any = None) -> Value:
    ptype = partition.type
    assert isinstance(ptype, PartitionType)
    return fe.op(MemoryOp.TILE_LOAD, [partition, *_index(fe, index, node)],
                 _hint_attrs(fe, node, latency, allow_tma), node=node).result


def _partition_store(fe: FrontEnd, node: ast.Call, partition: Value, index: Any, value: Any) -> None:
    ptype = partition.type
    assert isinstance(ptype, PartitionType)
    if not fe.unsafe:
        raise fe.type_error("storing at an arbitrary tile index needs @cutile.entry(unsafe=True); a safe kernel "
                            "writes only its own tile, with .store() on the Mut tensor", node)
    tile = _convert_value(fe, value, ptype.tensor.dtype, node, "store's value")
    fe.op(MemoryOp.TILE_STORE, [partition, *_index(fe, index, node), tile], node=node)
    return None


def _partition_atomic(mode: str) -> Impl:
    def impl(fe: FrontEnd, node: ast.Call, partition: Value, index: Any, value: Any, scope: Any = "device") -> None:
        ptype = partition.type
        assert isinstance(ptype, PartitionType)
        name = f"atomic_{mode}"
        if not fe.unsafe:
            raise fe.type_error(f"{name} into a partition's tile at an arbitrary index needs @cutile.entry(unsafe=True); "
                                f"a safe kernel updates its own tile with z.{name}(value)", node)
        tile = _convert_value(fe, value, ptype.tensor.dtype, node, f"{name}'s value")
        if tile.type.shape != ptype.tile_shape:  # type: ignore[attr-defined]
            tile = fe.broadcast_to(tile, ptype.tile_shape, node)
        fe.op(MemoryOp.TILE_ATOMIC, [partition, *_index(fe, index, node), tile],
              {"mode": mode, "scope": scope}, node=node)
        return None
    return impl


@functools.cache
def _method_signature(impl: Impl) -> inspect.Signature:
    """A method's signature after its receiver."""
    return user_signature(impl, 3)


class _BuiltinMethod:
    """A method that is a DSL function of its receiver (``t.sum(axis)`` is ``sum(t, axis)``),
    checked against that function's signature."""

    def __init__(self, builtin: Builtin[...]) -> None:
        self.builtin = builtin

    def __call__(self, fe: FrontEnd, node: ast.Call, receiver: Value, *args: Any, **kwargs: Any) -> Any:
        return self.builtin.emit(fe, node, [receiver, *args], kwargs)


def _bind_builtin(b: Builtin[...]) -> Impl:
    return _BuiltinMethod(b)


_TILE_METHODS: dict[str, Impl] = {
    "astype": _bind_builtin(astype), "bitcast": _bind_builtin(bitcast), "reshape": _bind_builtin(reshape),
    "broadcast_to": _bind_builtin(broadcast_to), "permute": _bind_builtin(permute),
    "transpose": _bind_builtin(transpose), "sum": _bind_builtin(sum_), "prod": _bind_builtin(prod),
    "max": _bind_builtin(max_), "min": _bind_builtin(min_), "argmax": _bind_builtin(argmax),
    "argmin": _bind_builtin(argmin), "cumsum": _bind_builtin(cumsum), "cumprod": _bind_builtin(cumprod),
    "extract": _bind_builtin(extract), "insert": _bind_builtin(insert), "expand_dims": _bind_builtin(expand_dims),
    "flip": _bind_builtin(flip),
}
_TENSOR_METHODS: dict[str, Impl] = {
    "load": _tensor_load, "store": _tensor_store, "partition": _tensor_partition,
    "tiles": tensor_tiles, "tiles_with": tensor_tiles_with, "tiles_within": tensor_tiles_within,
    "num_tiles": tensor_num_tiles,
    **{f"atomic_{mode}": _own_atomic(mode) for mode in RMW_MODES},
    "atomic_cas": _own_atomic_cas,
}
_PARTITION_METHODS: dict[str, Impl] = {
    "load": _partition_load, "store": _partition_store, "num_tiles": _bind_builtin(num_tiles),
    **{f"atomic_{mode}": _partition_atomic(mode) for mode in TILE_ATOMIC_MODES},
}


def value_attribute(fe: FrontEnd, value: Value, attr: str, node: ast.Attribute) -> Any:
    """``value.attr`` for a tile, tensor or partition value."""
    vtype = value.type
    if isinstance(vtype, TileType):
        if attr == "shape":
            return vtype.shape
        if attr == "dtype":
            return vtype.dtype
        if attr == "ndim":
            return vtype.rank
        if attr == "T":
            return transpose.impl(fe, node, value)  # type: ignore[arg-type]  # (the node only locates errors)
        methods = _TILE_METHODS
    elif isinstance(vtype, TensorType):
        if attr == "shape":
            return tuple(
                d if d is not None else fe.op(MemoryOp.TENSOR_DIM, [value], {"axis": i}, node=node).result
                for i, d in enumerate(vtype.shape))
        if attr == "dtype":
            return vtype.dtype
        if attr == "ndim":
            return vtype.rank
        methods = _TENSOR_METHODS
    elif isinstance(vtype, PartitionType):
        if attr == "tile_shape":
            return vtype.tile_shape
        if attr == "dtype":
            return vtype.tensor.dtype
        methods = _PARTITION_METHODS
    else:  # pragma: no cover - every value type is handled above
        methods = {}
    impl = methods.get(attr)
    if impl is None:
        known = ", ".join(sorted([*methods, "shape", "dtype"]))
        raise fe.syntax_error(f"{vtype} has no attribute '{attr}' (it has: {known})", node)
    return BoundMethod(attr, value, impl)
