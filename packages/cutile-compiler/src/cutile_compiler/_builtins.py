"""The DSL's functions and methods: what a kernel may call, and what each call emits.

Every public DSL function is a `Builtin`: calling it on the host raises (it only
means something inside a kernel); inside a kernel the front end calls its
implementation with itself, the call's AST node and the evaluated arguments.
The typing of each primitive lives with its op in `_opdefs`; functions here
normalize arguments (numbers to tiles, dtype promotion, broadcasting, axis
handling) and pick the ops.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import CutileError
from cutile_compiler._ir import Value
from cutile_compiler._opdefs.memory import PADDINGS
from cutile_compiler._types import PartitionType, TensorType, TileType, is_power_of_two

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd

_NUMBER = (bool, int, float)
Impl = Callable[..., Any]


class HostCallError(CutileError, RuntimeError):
    """A DSL function or device function was called outside a kernel."""


class Builtin:
    """A DSL function. ``impl(fe, node, *args, **kwargs)`` emits it in a kernel."""

    def __init__(self, name: str, impl: Impl, doc: str) -> None:
        self.__name__ = name
        self.__qualname__ = name
        self.__doc__ = doc
        self.impl = impl
        self.signature = inspect.signature(impl)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise HostCallError(f"{self.__name__}() can only be called inside a cutile kernel")

    def __repr__(self) -> str:
        return f"<cutile builtin {self.__name__}>"

    def emit(self, fe: FrontEnd, node: ast.Call, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        try:
            self.signature.bind(fe, node, *args, **kwargs)
        except TypeError as exc:
            params = [p for p in list(self.signature.parameters)[2:]]
            raise fe.type_error(f"{self.__name__}({', '.join(params)}): {exc}", node) from None
        return self.impl(fe, node, *args, **kwargs)


def builtin(impl: Impl) -> Builtin:
    """Declares a DSL function; its docstring is the user's documentation."""
    name = impl.__name__.rstrip("_")
    return Builtin(name, impl, inspect.getdoc(impl) or "")


class DeviceFunction:
    """A Python function called from kernels, inlined at each call (``@cutile.function``)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        functools.update_wrapper(self, function)
        self.python_function = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise HostCallError(f"{self.python_function.__qualname__} is a device function: call it from a kernel")

    def __repr__(self) -> str:
        return f"<cutile device function {self.python_function.__qualname__}>"


# -- helpers ----------------------------------------------------------------------------
def _tile(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> Value:
    return fe.to_tile(value, node, what=what)


def _static_int(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fe.type_error(f"{what} must be a compile-time int, got {fe.describe(value)}", node)
    return value


def _static_shape(fe: FrontEnd, value: Any, node: ast.AST, what: str = "shape", *, power_of_two: bool = True) -> tuple[int, ...]:
    items = value if isinstance(value, tuple) else (value,)
    shape = tuple(_static_int(fe, v, node, f"{what} dims") for v in items)
    if any(d <= 0 for d in shape):
        raise fe.type_error(f"{what} dims must be positive, got {list(shape)}", node)
    if power_of_two and not all(is_power_of_two(d) for d in shape):
        raise fe.type_error(f"tile dimensions must be powers of two, got {list(shape)}", node)
    return shape


def _dtype(fe: FrontEnd, value: Any, node: ast.AST) -> dt.DType:
    if not isinstance(value, dt.DType):
        raise fe.type_error(f"expected a dtype such as f32, got {fe.describe(value)}", node)
    return value


def _axis(fe: FrontEnd, axis: Any, rank: int, node: ast.AST) -> int:
    value = _static_int(fe, axis, node, "axis")
    if not -rank <= value < rank:
        raise fe.type_error(f"axis {value} is out of range for a rank-{rank} tile", node)
    return value % rank


def _index(fe: FrontEnd, index: Any, rank: int, node: ast.AST) -> list[Value]:
    items = index if isinstance(index, tuple) else (index,)
    if len(items) != rank:
        raise fe.type_error(f"the index needs {rank} coordinate(s), got {len(items)}", node)
    result = []
    for item in items:
        value = fe.to_tile(item, node, what="an index coordinate")
        if not (value.type.is_scalar and value.type.dtype.is_integer):  # type: ignore[attr-defined]
            raise fe.type_error(f"index coordinates must be integer scalars, got {value.type}", node)
        result.append(value)
    return result


def _partition(fe: FrontEnd, tensor: Value, shape: Any, padding: Any, node: ast.AST) -> Value:
    assert isinstance(tensor.type, TensorType)
    tile_shape = _static_shape(fe, shape, node, "partition shape")
    if len(tile_shape) != tensor.type.rank:
        raise fe.type_error(
            f"a rank-{tensor.type.rank} tensor is partitioned with {tensor.type.rank} tile dims, got {list(tile_shape)}", node)
    if padding not in PADDINGS:
        raise fe.type_error(f"padding must be one of {', '.join(PADDINGS)}, got {padding!r}", node)
    return fe.op("make_partition", [tensor], {"tile_shape": tile_shape, "padding": padding}, node=node).result


def _tensor_arg(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> Value:
    if not (isinstance(value, Value) and isinstance(value.type, TensorType)):
        raise fe.type_error(f"{what} must be a tensor parameter of the kernel, got {fe.describe(value)}", node)
    return value


# -- grid ---------------------------------------------------------------------------------
@builtin
def get_tile_block_id(fe: FrontEnd, node: ast.Call) -> tuple[Value, Value, Value]:
    """This block's coordinates in the grid, as three i32 scalars."""
    return (fe.block_id(0), fe.block_id(1), fe.block_id(2))


@builtin
def get_num_tile_blocks(fe: FrontEnd, node: ast.Call) -> tuple[Value, Value, Value]:
    """The grid's extent along each axis, as three i32 scalars."""
    return tuple(fe.op("num_blocks", [], {"axis": a}, node=node).result for a in range(3))  # type: ignore[return-value]


@builtin
def bid(fe: FrontEnd, node: ast.Call, axis: Any) -> Value:
    """This block's coordinate along ``axis`` (0, 1 or 2)."""
    return fe.block_id(_static_int(fe, axis, node, "axis"))


@builtin
def num_blocks(fe: FrontEnd, node: ast.Call, axis: Any) -> Value:
    """The grid's extent along ``axis``."""
    return fe.op("num_blocks", [], {"axis": _static_int(fe, axis, node, "axis")}, node=node).result


# -- memory --------------------------------------------------------------------------------
@builtin
def load_tile_like(fe: FrontEnd, node: ast.Call, tensor: Any, like: Any) -> Value:
    """The tile of ``tensor`` at the position and shape of this block's tile of ``like``
    (a Mut tensor). Elements past the end of ``tensor`` read as zero."""
    source = _tensor_arg(fe, tensor, node, "load_tile_like's first argument")
    target = _tensor_arg(fe, like, node, "load_tile_like's second argument")
    if target.type.tile_shape is None:  # type: ignore[attr-defined]
        raise fe.type_error("load_tile_like's second argument must be a Mut tensor (it decides the tile)", node)
    tile_shape = target.type.tile_shape  # type: ignore[attr-defined]
    if source.type.rank != len(tile_shape):  # type: ignore[attr-defined]
        raise fe.type_error(
            f"load_tile_like: {source.type} has rank {source.type.rank}, the tile of {target.type} rank {len(tile_shape)}", node)  # type: ignore[attr-defined]
    partition = fe.op("make_partition", [source], {"tile_shape": tile_shape, "padding": "zero"}, node=node).result
    return fe.op("tile_load", [partition, *fe.own_index(target)], node=node).result


@builtin
def load(fe: FrontEnd, node: ast.Call, tensor: Any, index: Any, shape: Any, padding: Any = "zero") -> Value:
    """The tile of ``shape`` at tile coordinates ``index`` of ``tensor`` (elements past
    the end read as ``padding``: zero, neg_zero, nan, pos_inf or neg_inf)."""
    source = _tensor_arg(fe, tensor, node, "load's tensor")
    partition = _partition(fe, source, shape, padding, node)
    return fe.op("tile_load", [partition, *_index(fe, index, source.type.rank, node)], node=node).result  # type: ignore[attr-defined]


@builtin
def num_tiles(fe: FrontEnd, node: ast.Call, partition: Any, axis: Any) -> Value:
    """How many tiles a partition has along ``axis`` (a partial last tile counts)."""
    if not (isinstance(partition, Value) and isinstance(partition.type, PartitionType)):
        raise fe.type_error(f"num_tiles takes a partition, got {fe.describe(partition)}", node)
    return fe.op("num_tiles", [partition], {"axis": _static_int(fe, axis, node, "axis")}, node=node).result


# -- creation ------------------------------------------------------------------------------
@builtin
def full(fe: FrontEnd, node: ast.Call, shape: Any, value: Any, dtype: Any) -> Value:
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
def zeros(fe: FrontEnd, node: ast.Call, shape: Any, dtype: Any) -> Value:
    """A tile of zeros."""
    return fe.constant(0, _dtype(fe, dtype, node), _static_shape(fe, shape, node), node)


@builtin
def ones(fe: FrontEnd, node: ast.Call, shape: Any, dtype: Any) -> Value:
    """A tile of ones."""
    return fe.constant(1, _dtype(fe, dtype, node), _static_shape(fe, shape, node), node)


@builtin
def arange(fe: FrontEnd, node: ast.Call, size: Any, dtype: Any = dt.i32) -> Value:
    """0, 1, ..., size-1 as a 1-D integer tile (size a power of two)."""
    (extent,) = _static_shape(fe, size, node, "arange's size")
    kind = _dtype(fe, dtype, node)
    if kind.is_float:
        values = fe.op("iota", [], {"type": TileType(dt.i32, (extent,))}, node=node).result
        return fe.cast(values, kind, node)
    return fe.op("iota", [], {"type": TileType(kind, (extent,))}, node=node).result


# -- element-wise --------------------------------------------------------------------------
def _elementwise(name: str, doc: str, arity: int) -> Builtin:
    if arity == 1:
        def impl1(fe: FrontEnd, node: ast.Call, x: Any) -> Value:
            value = _tile(fe, x, node, f"{name}'s argument")
            return fe.op(name, [value], node=node).result
        return Builtin(name, impl1, doc)

    def impl2(fe: FrontEnd, node: ast.Call, x: Any, y: Any) -> Value:
        a, b = fe.unify([x, y], node, f"{name}()")
        return fe.op(name, [a, b], node=node).result
    return Builtin(name, impl2, doc)


exp = _elementwise("exp", "e ** x", 1)
exp2 = _elementwise("exp2", "2 ** x", 1)
log = _elementwise("log", "The natural logarithm.", 1)
log2 = _elementwise("log2", "The base-2 logarithm.", 1)
sqrt = _elementwise("sqrt", "The square root.", 1)
rsqrt = _elementwise("rsqrt", "1 / sqrt(x).", 1)
sin = _elementwise("sin", "The sine (radians).", 1)
cos = _elementwise("cos", "The cosine (radians).", 1)
tan = _elementwise("tan", "The tangent (radians).", 1)
sinh = _elementwise("sinh", "The hyperbolic sine.", 1)
cosh = _elementwise("cosh", "The hyperbolic cosine.", 1)
tanh = _elementwise("tanh", "The hyperbolic tangent.", 1)
floor = _elementwise("floor", "Rounds down to an integral value (floats).", 1)
ceil = _elementwise("ceil", "Rounds up to an integral value (floats).", 1)
atan2 = _elementwise("atan2", "The angle of (x, y) = atan(y / x) in the right quadrant; atan2(y, x).", 2)
minimum = _elementwise("minimum", "The element-wise minimum.", 2)
maximum = _elementwise("maximum", "The element-wise maximum.", 2)


@builtin
def pow_(fe: FrontEnd, node: ast.Call, x: Any, y: Any) -> Any:
    """x ** y for floating-point tiles."""
    return fe.binary("pow", x, y, node, lambda a, b: a**b)


@builtin
def fma(fe: FrontEnd, node: ast.Call, a: Any, b: Any, c: Any) -> Value:
    """a * b + c with one rounding (floats)."""
    x, y, z = fe.unify([a, b, c], node, "fma()")
    return fe.op("fma", [x, y, z], node=node).result


@builtin
def where(fe: FrontEnd, node: ast.Call, condition: Any, x: Any, y: Any) -> Value:
    """x where ``condition`` (a bool tile) holds, else y; shapes broadcast."""
    cond = _tile(fe, condition, node, "where's condition")
    if cond.type.dtype is not dt.bool_:  # type: ignore[attr-defined]
        raise fe.type_error(f"where's condition must be a bool tile (a comparison), got {cond.type}", node)
    a, b = fe.unify([x, y], node, "where()")
    shape = fe.unify([cond, a], node, "where()")[0].type.shape  # type: ignore[attr-defined]
    return fe.op("select", [fe.broadcast_to(cond, shape, node), fe.broadcast_to(a, shape, node),
                            fe.broadcast_to(b, shape, node)], node=node).result


@builtin
def ceil_div(fe: FrontEnd, node: ast.Call, a: Any, b: Any) -> Any:
    """(a + b - 1) // b: how many chunks of b cover a."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise fe.type_error("ceil_div by zero", node)
        return -(-a // b)
    return fe.binary("floordiv", fe.binary("sub", fe.binary("add", a, b, node), 1, node), b, node)


@builtin
def astype(fe: FrontEnd, node: ast.Call, x: Any, dtype: Any) -> Value:
    """x converted to ``dtype`` (floats to ints truncate toward zero)."""
    return fe.cast(_tile(fe, x, node, "astype's argument"), _dtype(fe, dtype, node), node)


@builtin
def bitcast(fe: FrontEnd, node: ast.Call, x: Any, dtype: Any) -> Value:
    """x's bits read as ``dtype`` of the same width."""
    return fe.op("bitcast", [_tile(fe, x, node, "bitcast's argument")], {"dtype": _dtype(fe, dtype, node)}, node=node).result


# -- shape ---------------------------------------------------------------------------------
@builtin
def reshape(fe: FrontEnd, node: ast.Call, x: Any, shape: Any) -> Value:
    """The same elements (row-major) in another shape."""
    value = _tile(fe, x, node, "reshape's argument")
    target = _static_shape(fe, shape, node, power_of_two=False) if shape != () else ()
    return fe.op("reshape", [value], {"shape": target}, node=node).result


@builtin
def broadcast_to(fe: FrontEnd, node: ast.Call, x: Any, shape: Any) -> Value:
    """x repeated along new leading or size-1 dimensions to ``shape``."""
    return fe.broadcast_to(_tile(fe, x, node, "broadcast_to's argument"), _static_shape(fe, shape, node), node)


@builtin
def permute(fe: FrontEnd, node: ast.Call, x: Any, axes: Any) -> Value:
    """x with its dimensions reordered: result dim i is x's dim axes[i]."""
    value = _tile(fe, x, node, "permute's argument")
    perm = tuple(_static_int(fe, a, node, "axes") for a in (axes if isinstance(axes, tuple) else (axes,)))
    return fe.op("permute", [value], {"perm": perm}, node=node).result


@builtin
def transpose(fe: FrontEnd, node: ast.Call, x: Any) -> Value:
    """A 2-D tile transposed (the last two dimensions of a 3-D one)."""
    value = _tile(fe, x, node, "transpose's argument")
    rank = value.type.rank  # type: ignore[attr-defined]
    if rank < 2:
        raise fe.type_error(f"transpose needs a tile of rank 2 or more, got {value.type}", node)
    perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    return fe.op("permute", [value], {"perm": perm}, node=node).result


@builtin
def cat(fe: FrontEnd, node: ast.Call, a: Any, b: Any, axis: Any = 0) -> Value:
    """a and b joined along ``axis``."""
    x, y = _tile(fe, a, node, "cat's first tile"), _tile(fe, b, node, "cat's second tile")
    return fe.op("cat", [x, y], {"axis": _axis(fe, axis, x.type.rank, node)}, node=node).result  # type: ignore[attr-defined]


@builtin
def extract(fe: FrontEnd, node: ast.Call, x: Any, index: Any, shape: Any) -> Value:
    """The sub-tile of ``shape`` at tile coordinates ``index`` of x."""
    value = _tile(fe, x, node, "extract's argument")
    sub = _static_shape(fe, shape, node)
    return fe.op("extract", [value, *_index(fe, index, value.type.rank, node)], {"shape": sub}, node=node).result  # type: ignore[attr-defined]


# -- reductions and scans --------------------------------------------------------------------
def _reduce(fe: FrontEnd, node: ast.Call, kind: str, x: Any, axis: Any, keepdims: Any) -> Value:
    value = _tile(fe, x, node, f"{kind}'s argument")
    rank = value.type.rank  # type: ignore[attr-defined]
    if rank == 0:
        raise fe.type_error(f"{kind} needs a tile of rank 1 or more, got a scalar", node)
    if axis is None:
        if kind in ("argmax", "argmin") and rank != 1:
            raise fe.type_error(f"{kind} over all axes needs a 1-D tile; pass axis=", node)
        axes = list(range(rank))
    else:
        axes = [_axis(fe, a, rank, node) for a in (axis if isinstance(axis, tuple) else (axis,))]
    result = value
    for a in sorted(set(axes), reverse=True):
        result = fe.op("reduce", [result], {"kind": kind, "axis": a}, node=node).result
    if keepdims:
        shape = tuple(1 if i in axes else d for i, d in enumerate(value.type.shape))  # type: ignore[attr-defined]
        result = fe.op("reshape", [result], {"shape": shape}, node=node).result
    return result


def _reduction(kind: str, doc: str) -> Builtin:
    def impl(fe: FrontEnd, node: ast.Call, x: Any, axis: Any = None, keepdims: Any = False) -> Value:
        return _reduce(fe, node, kind, x, axis, keepdims)
    return Builtin(kind, impl, doc)


sum_ = _reduction("sum", "The sum along ``axis`` (all axes by default).")
prod = _reduction("prod", "The product along ``axis`` (all axes by default).")
max_ = _reduction("max", "The maximum along ``axis`` (all axes by default).")
min_ = _reduction("min", "The minimum along ``axis`` (all axes by default).")
argmax = _reduction("argmax", "The i32 position of the maximum along ``axis`` (first on ties).")
argmin = _reduction("argmin", "The i32 position of the minimum along ``axis`` (first on ties).")


def _scan(kind: str, doc: str) -> Builtin:
    def impl(fe: FrontEnd, node: ast.Call, x: Any, axis: Any = 0, reverse: Any = False) -> Value:
        value = _tile(fe, x, node, f"cum{kind}'s argument")
        rank = value.type.rank  # type: ignore[attr-defined]
        return fe.op("scan", [value], {"kind": kind, "axis": _axis(fe, axis, rank, node),
                                       "reverse": bool(reverse)}, node=node).result
    return Builtin("cum" + kind, impl, doc)


cumsum = _scan("sum", "Inclusive prefix sums along ``axis``.")
cumprod = _scan("prod", "Inclusive prefix products along ``axis``.")


# -- matrix products ---------------------------------------------------------------------------
@builtin
def mma(fe: FrontEnd, node: ast.Call, a: Any, b: Any, acc: Any) -> Value:
    """acc + a @ b on the tensor cores: (M, K) x (K, N) + (M, N), or batches of them."""
    x, y, z = (_tile(fe, v, node, f"mma's {n}") for v, n in ((a, "a"), (b, "b"), (acc, "acc")))
    return fe.op("mma", [x, y, z], node=node).result


@builtin
def matmul(fe: FrontEnd, node: ast.Call, a: Any, b: Any) -> Value:
    """a @ b, accumulated in f32 (f64 for f64 inputs, i32 for 8-bit integers)."""
    x, y = _tile(fe, a, node, "matmul's a"), _tile(fe, b, node, "matmul's b")
    in_type = x.type.dtype  # type: ignore[attr-defined]
    acc_dtype = dt.f64 if in_type is dt.f64 else dt.i32 if in_type.is_integer else dt.f32
    shape = x.type.shape[:-1] + y.type.shape[-1:]  # type: ignore[attr-defined]
    zero = fe.constant(0, acc_dtype, shape, node)
    return fe.op("mma", [x, y, zero], node=node).result


# -- compile time ------------------------------------------------------------------------------
@builtin
def static_assert(fe: FrontEnd, node: ast.Call, condition: Any, message: Any = "") -> None:
    """Fails compilation when a compile-time condition is false."""
    if isinstance(condition, Value):
        raise fe.type_error("static_assert needs a compile-time condition (constants and shapes only)", node)
    if not condition:
        raise fe.type_error(f"static_assert failed{': ' + str(message) if message else ''}", node)
    return None


class _StaticRange:
    """``for i in static_range(n)``: the loop is unrolled at compile time."""

    __name__ = "static_range"

    def __call__(self, *args: Any) -> range:
        return range(*args)

    def __repr__(self) -> str:
        return "<cutile static_range>"


static_range = _StaticRange()


# -- methods of values ----------------------------------------------------------------------------
class BoundMethod:
    """``value.method`` waiting for its call."""

    def __init__(self, name: str, receiver: Value, impl: Impl) -> None:
        self.__name__ = name
        self.receiver = receiver
        self.impl = impl


def _tensor_load(fe: FrontEnd, node: ast.Call, tensor: Value, index: Any = None, shape: Any = None, padding: Any = "zero") -> Value:
    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    if index is None and shape is None:
        if ttype.tile_shape is None:
            raise fe.type_error("load() without an index loads a Mut tensor's own tile; this tensor is read-only: "
                                "use load(index=..., shape=...) or .partition(...)", node)
        return fe.op("tile_load", [fe.own_partition(tensor, node), *fe.own_index(tensor)], node=node).result
    if index is None or shape is None:
        raise fe.type_error("load() takes both index= and shape= (or neither, for a Mut tensor's own tile)", node)
    result: Value = load.impl(fe, node, tensor, index, shape, padding)
    return result


def _tensor_store(fe: FrontEnd, node: ast.Call, tensor: Value, value: Any) -> None:
    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    if not ttype.mutable:
        raise fe.type_error("store: this tensor is read-only; declare the parameter Mut[Tensor[...]] to write it", node)
    assert ttype.tile_shape is not None
    tile = fe.to_tile(value, node, like=ttype.dtype, what="the stored value")
    if tile.type.dtype is not ttype.dtype:  # type: ignore[attr-defined]
        if not dt.converts_losslessly(tile.type.dtype, ttype.dtype) and not isinstance(value, _NUMBER):  # type: ignore[attr-defined]
            raise fe.type_error(
                f"store: a {tile.type} cannot be stored into a {ttype.dtype} tensor without loss; "
                f"convert it with .astype({ttype.dtype})", node)
        tile = fe.cast(tile, ttype.dtype, node)
    if tile.type.shape != ttype.tile_shape:  # type: ignore[attr-defined]
        if tile.type.is_scalar:  # type: ignore[attr-defined]
            tile = fe.broadcast_to(tile, ttype.tile_shape, node)
        else:
            raise fe.type_error(
                f"store: this block's tile of the tensor has shape {list(ttype.tile_shape)}, the value "
                f"{list(tile.type.shape)}", node)  # type: ignore[attr-defined]
    fe.op("tile_store", [fe.own_partition(tensor, node), *fe.own_index(tensor), tile], node=node)
    return None


def _tensor_partition(fe: FrontEnd, node: ast.Call, tensor: Value, shape: Any, padding: Any = "zero") -> Value:
    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    if ttype.mutable and not fe.unsafe:
        raise fe.type_error(
            "a Mut tensor is already partitioned among the blocks; read or write this block's tile with "
            ".load() / .store() (other partitions need @cutile.entry(unsafe=True))", node)
    return _partition(fe, tensor, shape, padding, node)


def _partition_load(fe: FrontEnd, node: ast.Call, partition: Value, index: Any) -> Value:
    ptype = partition.type
    assert isinstance(ptype, PartitionType)
    return fe.op("tile_load", [partition, *_index(fe, index, ptype.tensor.rank, node)], node=node).result


def _partition_store(fe: FrontEnd, node: ast.Call, partition: Value, index: Any, value: Any) -> None:
    ptype = partition.type
    assert isinstance(ptype, PartitionType)
    if not fe.unsafe:
        raise fe.type_error("storing at an arbitrary tile index needs @cutile.entry(unsafe=True); a safe kernel "
                            "writes only its own tile, with .store() on the Mut tensor", node)
    tile = fe.cast(fe.to_tile(value, node, like=ptype.tensor.dtype, what="the stored value"), ptype.tensor.dtype, node)
    fe.op("tile_store", [partition, *_index(fe, index, ptype.tensor.rank, node), tile], node=node)
    return None


def _partition_num_tiles(fe: FrontEnd, node: ast.Call, partition: Value, axis: Any) -> Value:
    result: Value = num_tiles.impl(fe, node, partition, axis)
    return result


def _bind_builtin(b: Builtin) -> Impl:
    def impl(fe: FrontEnd, node: ast.Call, receiver: Value, *args: Any, **kwargs: Any) -> Any:
        return b.emit(fe, node, [receiver, *args], kwargs)
    return impl


_TILE_METHODS: dict[str, Impl] = {
    "astype": _bind_builtin(astype), "bitcast": _bind_builtin(bitcast), "reshape": _bind_builtin(reshape),
    "broadcast_to": _bind_builtin(broadcast_to), "permute": _bind_builtin(permute),
    "transpose": _bind_builtin(transpose), "sum": _bind_builtin(sum_), "prod": _bind_builtin(prod),
    "max": _bind_builtin(max_), "min": _bind_builtin(min_), "argmax": _bind_builtin(argmax),
    "argmin": _bind_builtin(argmin), "cumsum": _bind_builtin(cumsum), "cumprod": _bind_builtin(cumprod),
    "extract": _bind_builtin(extract),
}
_TENSOR_METHODS: dict[str, Impl] = {"load": _tensor_load, "store": _tensor_store, "partition": _tensor_partition}
_PARTITION_METHODS: dict[str, Impl] = {"load": _partition_load, "store": _partition_store, "num_tiles": _partition_num_tiles}


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
            return transpose.impl(fe, node, value)
        methods = _TILE_METHODS
    elif isinstance(vtype, TensorType):
        if attr == "shape":
            return tuple(
                d if d is not None else fe.op("tensor_dim", [value], {"axis": i}, node=node).result
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


# -- Python builtins allowed in kernels ------------------------------------------------------------
def _py_min_max(kind: str) -> Impl:
    def impl(fe: FrontEnd, node: ast.Call, *args: Any) -> Any:
        if len(args) == 1:
            (only,) = args
            if isinstance(only, tuple):
                args = only
            else:
                return _reduce(fe, node, kind, only, None, False)
        if len(args) < 2:
            raise fe.type_error(f"{kind}() needs at least two values", node)
        if all(isinstance(a, _NUMBER) for a in args):
            return (builtins.min if kind == "min" else builtins.max)(args)
        result = args[0]
        for a in args[1:]:
            x, y = fe.unify([result, a], node, f"{kind}()")
            result = fe.op("minimum" if kind == "min" else "maximum", [x, y], node=node).result
        return result
    return impl


def _py_abs(fe: FrontEnd, node: ast.Call, x: Any) -> Any:
    if isinstance(x, _NUMBER):
        return abs(x)
    return fe.op("abs", [_tile(fe, x, node, "abs's argument")], node=node).result


def _py_convert(kind: type, dtype: dt.DType) -> Impl:
    def impl(fe: FrontEnd, node: ast.Call, x: Any) -> Any:
        if isinstance(x, _NUMBER):
            return kind(x)
        return fe.cast(_tile(fe, x, node, f"{kind.__name__}()'s argument"), dtype, node)
    return impl


def _py_len(fe: FrontEnd, node: ast.Call, x: Any) -> int:
    if isinstance(x, tuple):
        return len(x)
    raise fe.type_error(f"len() takes a tuple inside a kernel, got {fe.describe(x)}", node)


def _py_range(fe: FrontEnd, node: ast.Call, *args: Any) -> Any:
    if all(isinstance(a, int) for a in args):
        return tuple(range(*args))
    raise fe.syntax_error("range() with run-time bounds is only allowed as the iterable of a for loop", node)


_PYTHON_BUILTINS: dict[Any, Impl] = {
    builtins.min: _py_min_max("min"), builtins.max: _py_min_max("max"), builtins.abs: _py_abs,
    builtins.int: _py_convert(int, dt.i32), builtins.float: _py_convert(float, dt.f32),
    builtins.bool: _py_convert(bool, dt.bool_), builtins.len: _py_len, builtins.range: _py_range,
}


def call_object(fe: FrontEnd, callee: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> Any:
    """Emits a call of ``callee`` found in a kernel."""
    if isinstance(callee, Builtin):
        return callee.emit(fe, node, args, kwargs)
    if isinstance(callee, BoundMethod):
        try:
            inspect.signature(callee.impl).bind(fe, node, callee.receiver, *args, **kwargs)
        except TypeError as exc:
            raise fe.type_error(f".{callee.__name__}(): {exc}", node) from None
        return callee.impl(fe, node, callee.receiver, *args, **kwargs)
    if isinstance(callee, DeviceFunction):
        return fe.inline(callee.python_function, args, kwargs, node)
    if isinstance(callee, dt.DType):
        if len(args) != 1 or kwargs:
            raise fe.type_error(f"{callee}(x) converts one value", node)
        value = args[0]
        if isinstance(value, _NUMBER):
            return fe.constant(value, callee, node=node)
        return fe.cast(_tile(fe, value, node, f"{callee}()'s argument"), callee, node)
    try:
        python_builtin = _PYTHON_BUILTINS.get(callee)
    except TypeError:  # unhashable
        python_builtin = None
    if python_builtin is not None:
        if kwargs:
            raise fe.type_error(f"{getattr(callee, '__name__', callee)}() takes no keyword arguments in a kernel", node)
        return python_builtin(fe, node, *args)
    if callee is builtins.print:
        raise fe.syntax_error("print() inside kernels is not supported yet", node)
    if isinstance(callee, _StaticRange):
        raise fe.syntax_error("static_range() is only allowed as the iterable of a for loop", node)
    name = getattr(callee, "__qualname__", None) or getattr(callee, "__name__", None) or type(callee).__name__
    if inspect.isfunction(callee) and callee.__name__ == "<lambda>":
        return fe.inline(callee, args, kwargs, node)  # a lambda is an expression: inlined as it is
    if inspect.isfunction(callee):
        raise fe.syntax_error(
            f"cannot call the Python function {name} inside a kernel; decorate it with @cutile.function to "
            "make it a device function", node)
    raise fe.syntax_error(f"cannot call {fe.describe(callee)} inside a kernel", node)
