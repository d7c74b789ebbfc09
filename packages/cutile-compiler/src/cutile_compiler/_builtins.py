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
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec

import numpy as np

from cutile_compiler import _dtypes as dt
from cutile_compiler._dtypes import DType
from cutile_compiler._errors import CutileError, bounded_repr
from cutile_compiler._ir import Value
from cutile_compiler._opdefs._base import OPS, OpDef, RuleError
from cutile_compiler._opdefs.elementwise import F32_ONLY_ROUNDINGS
from cutile_compiler._opdefs.memory import TILE_ATOMIC_MODES
from cutile_compiler._opdefs.pointer import RMW_MODES, check_writable
from cutile_compiler._opdefs.shape import constant_value
from cutile_compiler._types import PartitionType, TensorType, TileType, broadcast_shapes, tile_shape_problem

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd

_NUMBER = (bool, int, float)
Impl = Callable[..., Any]
#: A DSL function's parameters as the kernel author writes them (static tools show them)
Params = ParamSpec("Params")


class HostCallError(CutileError, RuntimeError):
    """A DSL function or device function was called outside a kernel."""


def user_signature(impl: Impl, hidden: int = 2) -> inspect.Signature:
    """The signature a kernel author calls: ``impl``'s without its first ``hidden``
    parameters (the front end, the call's node, a method's receiver), and without the
    ``Any`` hints that only say the front end checks the value itself."""
    signature = inspect.signature(impl)
    params = [p.replace(annotation=inspect.Parameter.empty) if p.annotation in ("Any", Any) else p
              for p in list(signature.parameters.values())[hidden:]]
    returns = signature.return_annotation
    if returns not in ("None", None):  # what a DSL function returns is a tile (or tuple); said in its doc
        returns = inspect.Signature.empty
    return signature.replace(parameters=params, return_annotation=returns)


def _spelled(name: str, signature: inspect.Signature) -> str:
    """``name(parameters)`` without type hints, as an error message shows the call's shape."""
    params = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return f"{name}{signature.replace(parameters=params, return_annotation=inspect.Signature.empty)}"


def bind_call(fe: FrontEnd, node: ast.Call, name: str, signature: inspect.Signature, args: Sequence[Any],
              kwargs: dict[str, Any]) -> None:
    """Checks a kernel's call of DSL function (or method) ``name`` against its one
    signature: a wrong count of arguments or an unknown keyword is a `TileTypeError`
    at ``node`` naming the function and the parameter."""
    params = list(signature.parameters.values())
    keywords = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [k for k in kwargs if k not in keywords and not any(p.kind is p.VAR_KEYWORD for p in params)]
    if unknown:
        takes = f"takes only {', '.join(keywords)}" if keywords else "takes no keyword arguments"
        raise fe.type_error(f"{name}() {takes}, got {', '.join(unknown)}", node)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(args) > len(positional) and not any(p.kind is p.VAR_POSITIONAL for p in params):
        counted = f"{len(positional)} positional argument{'s' * (len(positional) != 1)}"
        listed = f" ({', '.join(positional)})" if positional else ""
        raise fe.type_error(f"{_spelled(name, signature)} takes {counted}{listed}, got {len(args)}", node)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:  # a missing argument, or one given twice: Python's words name the parameter
        raise fe.type_error(f"{_spelled(name, signature)}: {exc}", node) from None


#: The DSL functions by the name kernels call them, in the order they are declared:
#: what `cutile_compiler.language` exports (with its dtypes, annotations and classes).
DSL_FUNCTIONS: dict[str, Builtin[...] | _StaticRange] = {}


class Builtin(Generic[Params]):
    """A DSL function. ``impl(fe, node, *args, **kwargs)`` emits it in a kernel; on the
    host it presents ``impl``'s parameters after those two (`inspect.signature`) and
    its documentation, and calling it raises `HostCallError`. Its type parameter is
    those parameters, so that type checkers and IDEs show them too."""

    def __init__(self, name: str, impl: Callable[Concatenate[FrontEnd, ast.Call, Params], Any], doc: str) -> None:
        if name in DSL_FUNCTIONS:
            raise ValueError(f"the DSL function {name} is declared twice")  # pragma: no cover - a compiler bug
        self.__name__ = name
        self.__qualname__ = name
        self.__module__ = "cutile_compiler.language"
        self.__doc__ = doc
        self.impl = impl
        self.__signature__ = user_signature(impl)
        DSL_FUNCTIONS[name] = self

    def __call__(self, *args: Params.args, **kwargs: Params.kwargs) -> Any:
        raise HostCallError(f"{self.__name__}() can only be called inside a cutile kernel")

    def __repr__(self) -> str:
        return f"<cutile builtin {self.__name__}{self.__signature__}>"

    def emit(self, fe: FrontEnd, node: ast.Call, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        bind_call(fe, node, self.__name__, self.__signature__, args, kwargs)
        return self.impl(fe, node, *args, **kwargs)


def builtin(impl: Callable[Concatenate[FrontEnd, ast.Call, Params], Any]) -> Builtin[Params]:
    """Declares a DSL function; its docstring is the user's documentation."""
    name = impl.__name__.rstrip("_")
    return Builtin(name, impl, inspect.getdoc(impl) or "")


def family_member(template: Callable[Concatenate[str, FrontEnd, ast.Call, Params], Any], which: str, name: str,
                  doc: str) -> Builtin[Params]:
    """The DSL function ``name`` of a family declared once: ``template(which, fe, node, ...)``
    (``which`` picks the member, e.g. the op of an element-wise function), with the
    template's parameters after those three."""
    def impl(fe: FrontEnd, node: ast.Call, /, *args: Params.args, **kwargs: Params.kwargs) -> Any:
        return template(which, fe, node, *args, **kwargs)

    shown = inspect.signature(template)
    impl.__signature__ = shown.replace(parameters=list(shown.parameters.values())[1:])  # type: ignore[attr-defined]
    return Builtin(name, impl, doc)


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
    if isinstance(value, bool) or not isinstance(value, int) or value.bit_length() > 63:
        raise fe.type_error(f"{what} must be a compile-time int (of 64 bits), got {fe.describe(value)}", node)
    return value


def _static_bool(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> bool:
    if not isinstance(value, bool):
        raise fe.type_error(f"{what} must be True or False, got {fe.describe(value)}", node)
    return value


def _static_shape(fe: FrontEnd, value: Any, node: ast.AST, what: str = "shape", *, power_of_two: bool = True) -> tuple[int, ...]:
    items = value if isinstance(value, tuple) else (value,)
    shape = tuple(_static_int(fe, v, node, f"{what} dims") for v in items)
    if any(d <= 0 for d in shape):
        raise fe.type_error(f"{what} dims must be positive, got {list(shape)}", node)
    problem = tile_shape_problem(shape) if power_of_two else None
    if problem is not None:
        raise fe.type_error(f"{what}: {problem}", node)
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


def _index(fe: FrontEnd, index: Any, node: ast.AST) -> list[Value]:
    """A tile index's coordinates as values; their count and kinds are the op's rule
    (`check_index`)."""
    items = index if isinstance(index, tuple) else (index,)
    return [fe.to_tile(item, node, what="an index coordinate") for item in items]


def _partition(fe: FrontEnd, tensor: Value, shape: Any, padding: Any, node: ast.AST) -> Value:
    assert isinstance(tensor.type, TensorType)
    if tensor.type.mutable and not fe.unsafe:
        # Any other view of a tensor the blocks write would let a block read tiles
        # that other blocks are writing: a race.
        raise fe.type_error(
            "a Mut tensor is already partitioned among the blocks, which write it tile by tile; a safe kernel "
            "reads it only through its own tile (.load() without an index) and writes it with .store(). Other "
            "tiles need @cutile.entry(unsafe=True)", node)
    tile_shape = _static_shape(fe, shape, node, "partition shape")
    # the tile shape's rank and the padding are the op's rules (`MakePartition`)
    return fe.op("make_partition", [tensor], {"tile_shape": tile_shape, "padding": padding}, node=node).result


def _writable(fe: FrontEnd, tensor: TensorType, name: str, node: ast.AST) -> None:
    """The ops' one rule of which tensors a kernel may write (`check_writable`), checked
    at ``node`` before the other operands are looked at."""
    try:
        check_writable(tensor, name)
    except RuleError as exc:
        raise fe.type_error(str(exc), node) from None


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
def bid(fe: FrontEnd, node: ast.Call, axis: int) -> Value:
    """This block's coordinate along ``axis`` (0, 1 or 2)."""
    return fe.block_id(_static_int(fe, axis, node, "axis"))


@builtin
def num_blocks(fe: FrontEnd, node: ast.Call, axis: int) -> Value:
    """The grid's extent along ``axis``."""
    return fe.op("num_blocks", [], {"axis": _static_int(fe, axis, node, "axis")}, node=node).result


# -- memory --------------------------------------------------------------------------------
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
    if source.type.mutable and source_tile != tile_shape and not fe.unsafe:  # type: ignore[attr-defined]
        raise fe.type_error(
            f"load_tile_like: {source.type} is written by the blocks in tiles of {list(source_tile or ())}; reading "
            f"it in tiles of {list(tile_shape)} would read other blocks' tiles while they write them (a race). "
            "Read a Mut tensor through its own tile (.load()), or use @cutile.entry(unsafe=True)", node)
    if source.type.rank != len(tile_shape):  # type: ignore[attr-defined]
        raise fe.type_error(
            f"load_tile_like: {source.type} has rank {source.type.rank}, the tile of {target.type} rank {len(tile_shape)}", node)  # type: ignore[attr-defined]
    partition = fe.op("make_partition", [source], {"tile_shape": tile_shape, "padding": "zero"}, node=node).result
    return fe.op("tile_load", [partition, *fe.own_index(target)], _hint_attrs(fe, node, latency, allow_tma),
                 node=node).result


@builtin
def load(fe: FrontEnd, node: ast.Call, tensor: Any, index: Any, shape: Any, padding: Any = "zero",
         latency: int | None = None, allow_tma: bool | None = None) -> Value:
    """The tile of ``shape`` at tile coordinates ``index`` of ``tensor`` (elements past
    the end read as ``padding``: zero, neg_zero, nan, pos_inf or neg_inf).
    ``latency`` (1 to 10) and ``allow_tma`` are hints to tileiras."""
    source = _tensor_arg(fe, tensor, node, "load's tensor")
    partition = _partition(fe, source, shape, padding, node)
    return fe.op("tile_load", [partition, *_index(fe, index, node)],
                 _hint_attrs(fe, node, latency, allow_tma), node=node).result


@builtin
def num_tiles(fe: FrontEnd, node: ast.Call, partition: Any, axis: int) -> Value:
    """How many tiles a partition has along ``axis`` (a partial last tile counts)."""
    if not (isinstance(partition, Value) and isinstance(partition.type, PartitionType)):
        raise fe.type_error(f"num_tiles takes a partition, got {fe.describe(partition)}", node)
    return fe.op("num_tiles", [partition], {"axis": _static_int(fe, axis, node, "axis")}, node=node).result


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
        values = fe.op("iota", [], {"type": TileType(dt.i32, (extent,))}, node=node).result
        return fe.cast(values, kind, node)
    return fe.op("iota", [], {"type": TileType(kind, (extent,))}, node=node).result


# -- element-wise --------------------------------------------------------------------------
def _float_options(fe: FrontEnd, node: ast.AST, name: str, rounding: Any, flush_to_zero: Any) -> dict[str, Any]:
    """The rounding/ftz attributes of a float op, checked for their Python types."""
    attrs: dict[str, Any] = {}
    if rounding is not None:
        if not isinstance(rounding, str):
            raise fe.type_error(f"{name}: rounding must be a string such as 'zero', got {fe.describe(rounding)}", node)
        attrs["rounding"] = rounding
    if flush_to_zero is not False:
        attrs["ftz"] = _static_bool(fe, flush_to_zero, node, f"{name}: flush_to_zero")
    return attrs


def _options_doc(opdef: OpDef) -> str:
    """The documentation of the float options ``opdef`` takes."""
    doc = ""
    if opdef.rounding_modes:
        directed = [m for m in opdef.rounding_modes if m not in F32_ONLY_ROUNDINGS]
        fast = [m for m in opdef.rounding_modes if m in F32_ONLY_ROUNDINGS]
        faster = f", or for f32 the faster {' or '.join(fast)}" if fast else ""
        doc += (f" ``rounding``: {', '.join(directed[:-1])} or {directed[-1]} (f32 and f16; nearest_even is the"
                f" default){faster}.")
    if opdef.flush_to_zero:
        doc += " ``flush_to_zero=True`` (f32) treats subnormal inputs and results as zero."
    return doc


# Element-wise DSL functions whose plain-number calls fold (all of them but fma,
# which has three operands and keeps its single rounding on the device).
_FOLDABLE = frozenset({"minimum", "maximum", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan",
                       "sinh", "cosh", "tanh", "floor", "ceil", "atan2"})


def _fold(fe: FrontEnd, node: ast.AST, name: str, *values: bool | int | float) -> bool | int | float:
    """A DSL function applied to Python numbers, computed at compile time with the
    op's own numpy meaning (so a constant and a tile agree), as a Python number."""
    from cutile_compiler._opdefs.elementwise import ELEMENTWISE

    def compute(*numbers: bool | int | float) -> bool | int | float:
        arrays = [np.asarray(v) for v in numbers]
        if any(a.dtype == object for a in arrays):  # an int past 64 bits
            raise OverflowError("an int of more than 64 bits has no numpy value")
        with np.errstate(all="ignore"):  # inf and nan are the answers, as on a tile
            folded: bool | int | float = np.asarray(ELEMENTWISE[name].function(*arrays)).item()
        return folded

    return fe.fold(compute, values, lambda: f"{name}({', '.join(bounded_repr(v) for v in values)})", node)  # type: ignore[no-any-return]


def _unary(name: str, fe: FrontEnd, node: ast.Call, x: Any, /, *, rounding: str | None = None,
           flush_to_zero: bool = False) -> Any:
    """An element-wise op of one operand; it takes the float options the op takes
    (`OpDef.rounding_modes`, `OpDef.flush_to_zero`), which the op checks."""
    if isinstance(x, _NUMBER) and rounding is None and flush_to_zero is False and name in _FOLDABLE:
        return _fold(fe, node, name, x)  # a constant stays a (weak) Python number
    value = _tile(fe, x, node, f"{name}'s argument")
    return fe.op(name, [value], _float_options(fe, node, name, rounding, flush_to_zero), node=node).result


def _binary(name: str, fe: FrontEnd, node: ast.Call, x: Any, y: Any, /, *, rounding: str | None = None,
            flush_to_zero: bool = False) -> Any:
    """An element-wise op of two operands (promoted and broadcast together)."""
    if (isinstance(x, _NUMBER) and isinstance(y, _NUMBER) and rounding is None and flush_to_zero is False
            and name in _FOLDABLE):
        return _fold(fe, node, name, x, y)
    attrs = _float_options(fe, node, name, rounding, flush_to_zero)
    a, b = fe.unify([x, y], node, f"{name}()")
    return fe.op(name, [a, b], attrs, node=node).result


def _elementwise(template: Callable[Concatenate[str, FrontEnd, ast.Call, Params], Any], name: str,
                 doc: str) -> Builtin[Params]:
    """Element-wise DSL function ``name`` (`_unary` or `_binary`), documented with the
    float options its op takes."""
    how = " Element-wise." if template is _unary else " Element-wise; shapes broadcast and dtypes promote."
    return family_member(template, name, name, doc + how + _options_doc(OPS[name]))


exp = _elementwise(_unary, "exp", "e ** x.")
exp2 = _elementwise(_unary, "exp2", "2 ** x.")
log = _elementwise(_unary, "log", "The natural logarithm.")
log2 = _elementwise(_unary, "log2", "The base-2 logarithm.")
sqrt = _elementwise(_unary, "sqrt", "The square root.")
rsqrt = _elementwise(_unary, "rsqrt", "1 / sqrt(x).")
sin = _elementwise(_unary, "sin", "The sine (radians).")
cos = _elementwise(_unary, "cos", "The cosine (radians).")
tan = _elementwise(_unary, "tan", "The tangent (radians).")
sinh = _elementwise(_unary, "sinh", "The hyperbolic sine.")
cosh = _elementwise(_unary, "cosh", "The hyperbolic cosine.")
tanh = _elementwise(_unary, "tanh", "The hyperbolic tangent.")
floor = _elementwise(_unary, "floor", "Rounds down to an integral value (floats).")
ceil = _elementwise(_unary, "ceil", "Rounds up to an integral value (floats).")
atan2 = _elementwise(_binary, "atan2", "The angle of (x, y) = atan(y / x) in the right quadrant; atan2(y, x).")
minimum = _elementwise(_binary, "minimum", "The element-wise minimum.")
maximum = _elementwise(_binary, "maximum", "The element-wise maximum.")
add = _elementwise(_binary, "add", "x + y.")
sub = _elementwise(_binary, "sub", "x - y.")
mul = _elementwise(_binary, "mul", "x * y.")
div = _elementwise(_binary, "div", "x / y for floats.")


@builtin
def pow_(fe: FrontEnd, node: ast.Call, x: Any, y: Any) -> Any:
    """x ** y for floating-point tiles."""
    return fe.binary("pow", x, y, node, operator.pow)


@builtin
def fma(fe: FrontEnd, node: ast.Call, a: Any, b: Any, c: Any, /, *, rounding: str | None = None,
        flush_to_zero: bool = False) -> Value:
    """a * b + c with one rounding (floats)."""
    attrs = _float_options(fe, node, "fma", rounding, flush_to_zero)
    x, y, z = fe.unify([a, b, c], node, "fma()")
    return fe.op("fma", [x, y, z], attrs, node=node).result


fma.__doc__ = (fma.__doc__ or "") + _options_doc(OPS["fma"])


@builtin
def where(fe: FrontEnd, node: ast.Call, condition: Any, x: Any, y: Any) -> Any:
    """x where ``condition`` (a bool tile) holds, else y; shapes broadcast."""
    if isinstance(condition, bool) and isinstance(x, _NUMBER) and isinstance(y, _NUMBER):
        return x if condition else y  # decided at compile time
    cond = _tile(fe, condition, node, "where's condition")  # its dtype is the op's rule (`Select`)
    a, b = fe.unify([x, y], node, "where()")
    shape = fe.common_shape([cond, a], node, "where(): shapes")
    return fe.op("select", [fe.broadcast_to(cond, shape, node), fe.broadcast_to(a, shape, node),
                            fe.broadcast_to(b, shape, node)], node=node).result


@builtin
def ceil_div(fe: FrontEnd, node: ast.Call, a: Any, b: Any) -> Any:
    """(a + b - 1) // b: how many chunks of b cover a."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise fe.type_error("ceil_div by zero", node)
        return fe.fold(lambda x, y: -(-x // y), (a, b), lambda: f"ceil_div({bounded_repr(a)}, {bounded_repr(b)})", node)
    return fe.binary("floordiv", fe.binary("sub", fe.binary("add", a, b, node), 1, node), b, node)


cdiv = DSL_FUNCTIONS["cdiv"] = ceil_div  # cuTile's name for it


@builtin
def astype(fe: FrontEnd, node: ast.Call, x: Any, dtype: DType, rounding: str | None = None) -> Value:
    """x converted to ``dtype`` (floats to ints truncate toward zero). Conversions to
    floats round to nearest even, or toward zero with ``rounding="zero"`` (to f32
    or f16)."""
    value = _tile(fe, x, node, "astype's argument")
    target = _dtype(fe, dtype, node)
    attrs = _float_options(fe, node, "astype", rounding, False)
    if not attrs or value.type.dtype is target:  # type: ignore[attr-defined]
        return fe.cast(value, target, node)
    return fe.op("cast", [value], {"dtype": target, **attrs}, node=node).result


@builtin
def bitcast(fe: FrontEnd, node: ast.Call, x: Any, dtype: DType) -> Value:
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
def cat(fe: FrontEnd, node: ast.Call, a: Any, b: Any, axis: int = 0) -> Value:
    """a and b joined along ``axis``."""
    x, y = _tile(fe, a, node, "cat's first tile"), _tile(fe, b, node, "cat's second tile")
    return fe.op("cat", [x, y], {"axis": _axis(fe, axis, x.type.rank, node)}, node=node).result  # type: ignore[attr-defined]


@builtin
def extract(fe: FrontEnd, node: ast.Call, x: Any, index: Any, shape: Any) -> Value:
    """The sub-tile of ``shape`` at tile coordinates ``index`` of x."""
    value = _tile(fe, x, node, "extract's argument")
    sub = _static_shape(fe, shape, node)
    return fe.op("extract", [value, *_index(fe, index, node)], {"shape": sub}, node=node).result


# -- reductions and scans --------------------------------------------------------------------
def _reducible_rank(fe: FrontEnd, value: Value, kind: str, node: ast.AST) -> int:
    """The rank of a tile to reduce or scan (checked before its axis is read: a
    scalar has none)."""
    rank: int = value.type.rank  # type: ignore[attr-defined]
    if rank == 0:
        raise fe.type_error(f"{kind} needs a tile of rank 1 or more, got a scalar", node)
    return rank


def _reduce(fe: FrontEnd, node: ast.Call, kind: str, x: Any, axis: Any, keepdims: Any) -> Value:
    value = _tile(fe, x, node, f"{kind}'s argument")
    rank = _reducible_rank(fe, value, kind, node)
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


def _reduction(kind: str, fe: FrontEnd, node: ast.Call, x: Any, axis: int | tuple[int, ...] | None = None,
               keepdims: bool = False) -> Value:
    return _reduce(fe, node, kind, x, axis, keepdims)


sum_ = family_member(_reduction, "sum", "sum", "The sum along ``axis`` (all axes by default).")
prod = family_member(_reduction, "prod", "prod", "The product along ``axis`` (all axes by default).")
max_ = family_member(_reduction, "max", "max", "The maximum along ``axis`` (all axes by default).")
min_ = family_member(_reduction, "min", "min", "The minimum along ``axis`` (all axes by default).")
argmax = family_member(_reduction, "argmax", "argmax",
                       "The i32 position of the maximum along ``axis`` (first on ties).")
argmin = family_member(_reduction, "argmin", "argmin",
                       "The i32 position of the minimum along ``axis`` (first on ties).")


def _scan(kind: str, fe: FrontEnd, node: ast.Call, x: Any, axis: int = 0, reverse: bool = False) -> Value:
    value = _tile(fe, x, node, f"cum{kind}'s argument")
    rank = _reducible_rank(fe, value, f"cum{kind}", node)
    return fe.op("scan", [value], {"kind": kind, "axis": _axis(fe, axis, rank, node),
                                   "reverse": bool(reverse)}, node=node).result


cumsum = family_member(_scan, "sum", "cumsum", "Inclusive prefix sums along ``axis``.")
cumprod = family_member(_scan, "prod", "cumprod", "Inclusive prefix products along ``axis``.")


def _combining(fe: FrontEnd, node: ast.Call, kind: str, x: Any, axis: Any, combine_fn: Any, identity: Any,
               attrs: dict[str, Any]) -> Any:
    """A reduce_fn/scan_fn op whose body is ``combine_fn(accumulator, element)`` inlined."""
    from cutile_compiler._ir import Block

    is_tuple = isinstance(x, tuple)
    tiles = [_tile(fe, v, node, f"{kind}'s tile") for v in (x if is_tuple else (x,))]
    identities = identity if isinstance(identity, tuple) else (identity,)
    if len(identities) != len(tiles):
        raise fe.type_error(f"{kind}: {len(tiles)} tile(s) need {len(identities)} identity value(s), got "
                            f"{len(identities)}", node)
    from cutile_compiler._frontend import KernelLambda

    if not (isinstance(combine_fn, (DeviceFunction, KernelLambda)) or inspect.isfunction(combine_fn)):
        raise fe.type_error(f"{kind}'s combine_fn must be a @cutile.function or a lambda of (accumulator, element), "
                            f"got {fe.describe(combine_fn)}", node)
    rank = _reducible_rank(fe, tiles[0], kind, node)
    checked: list[int | float | bool] = []
    for tile, ident in zip(tiles, identities):
        dtype: dt.DType = tile.type.dtype  # type: ignore[attr-defined]
        if not isinstance(ident, _NUMBER) or (dtype.is_integer and isinstance(ident, float)):
            raise fe.type_error(f"{kind}: the identity of a {dtype} tile must be a {dtype} number, got "
                                f"{fe.describe(ident)}", node)
        try:
            checked.append(constant_value(ident, dtype))
        except RuleError as exc:
            raise fe.type_error(f"{kind}'s identity: {exc}", node) from None
    body = Block()
    elements, accumulators = [], []
    for tile in tiles:
        scalar = TileType(tile.type.dtype)  # type: ignore[attr-defined]
        element, accumulator = Value(scalar, "element"), Value(scalar, "acc")
        body.args += [element, accumulator]
        elements.append(element)
        accumulators.append(accumulator)
    with fe.inserting(body):
        arguments: list[Any] = [tuple(accumulators), tuple(elements)] if is_tuple else [accumulators[0], elements[0]]
        result = call_object(fe, combine_fn, arguments, {}, node)
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != len(tiles) or (is_tuple != isinstance(result, tuple)):
            raise fe.type_error(f"{kind}: combine_fn must return {len(tiles)} value(s), like its accumulator, got "
                                f"{fe.describe(result)}", node)
        yielded = []
        for value, accumulator in zip(results, accumulators):
            wanted = accumulator.type
            assert isinstance(wanted, TileType)
            tile = fe.to_tile(value, node, like=wanted.dtype, what=f"{kind}'s combined value")
            if tile.type != wanted:
                if isinstance(tile.type, TileType) and tile.type.is_scalar and dt.converts_losslessly(tile.type.dtype, wanted.dtype):
                    tile = fe.cast(tile, wanted.dtype, node)
                else:
                    raise fe.type_error(f"{kind}: combine_fn must return {wanted} values, got {tile.type}", node)
            yielded.append(tile)
        fe.op("yield", yielded, node=node)
    name = "reduce_fn" if kind == "reduce" else "scan_fn"
    op = fe.op(name, tiles, {"axis": _axis(fe, axis, rank, node), "identities": tuple(checked), **attrs}, [body],
               node=node)
    return tuple(op.results) if is_tuple else op.results[0]


@builtin
def reduce(fe: FrontEnd, node: ast.Call, x: Any, axis: int, combine_fn: Any, identity: Any) -> Any:
    """x reduced along ``axis`` by ``combine_fn(accumulator, element)`` (a device
    function or lambda on scalars; associative and commutative), starting from
    ``identity``. ``x`` may be a tuple of tiles of one shape, with a tuple of
    identities; combine_fn then takes and returns tuples."""
    return _combining(fe, node, "reduce", x, axis, combine_fn, identity, {})


@builtin
def scan(fe: FrontEnd, node: ast.Call, x: Any, axis: int, combine_fn: Any, identity: Any, reverse: bool = False) -> Any:
    """Inclusive scan of x along ``axis`` by ``combine_fn(accumulator, element)``, as
    for `reduce` (``reverse=True`` scans from the end)."""
    return _combining(fe, node, "scan", x, axis, combine_fn, identity, {"reverse": bool(reverse)})


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


# -- element-wise memory access: gather, scatter, atomics ------------------------------------------
def _convert_value(fe: FrontEnd, value: Any, dtype: dt.DType, node: ast.AST, what: str) -> Value:
    tile = fe.to_tile(value, node, like=dtype, what=what)
    if tile.type.dtype is not dtype:  # type: ignore[attr-defined]
        if not dt.converts_losslessly(tile.type.dtype, dtype) and not isinstance(value, _NUMBER):  # type: ignore[attr-defined]
            raise fe.type_error(f"{what}: a {tile.type} cannot become {dtype} without loss; convert it with "
                                f".astype({dtype})", node)
        tile = fe.cast(tile, dtype, node)
    return tile


def _access(fe: FrontEnd, node: ast.Call, name: str, tensor: Any, indices: Any, values: Sequence[tuple[Any, str]],
            mask: Any, *, writes: bool) -> tuple[Value, list[Value], list[Value], Value | None]:
    """Checks and broadcasts the operands of a gather, scatter or atomic at ``indices``."""
    target = _tensor_arg(fe, tensor, node, f"{name}'s tensor")
    ttype = target.type
    assert isinstance(ttype, TensorType)
    if not fe.unsafe:
        raise fe.type_error(
            f"{name} at arbitrary indices needs @cutile.entry(unsafe=True): nothing checks its indices on the GPU"
            + ("; a safe kernel may update its own tile atomically with the Mut tensor's methods "
               f"(z.{name}(value))" if name.startswith("atomic") else ""), node)
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
    index_tiles = [fe.broadcast_to(t, shape, node) for t in index_tiles]
    value_tiles = [fe.broadcast_to(t, shape, node) for t in value_tiles]
    if mask_tile is not None:
        mask_tile = fe.broadcast_to(mask_tile, shape, node)
    return target, index_tiles, value_tiles, mask_tile


def _hint_attrs(fe: FrontEnd, node: ast.AST, latency: Any, allow_tma: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if latency is not None:
        value = _static_int(fe, latency, node, "latency")
        if not 1 <= value <= 10:
            raise fe.type_error(f"latency must be from 1 to 10, got {value}", node)
        attrs["latency"] = value
    if allow_tma is not None:
        attrs["allow_tma"] = _static_bool(fe, allow_tma, node, "allow_tma")
    return attrs


@builtin
def gather(fe: FrontEnd, node: ast.Call, tensor: Any, indices: Any, mask: Any = None, padding: Any = 0,
           latency: int | None = None) -> Value:
    """The elements of ``tensor`` at ``indices`` (one integer tile per dimension;
    shapes broadcast), where ``mask`` holds; masked-off elements read ``padding``.
    Only in ``@cutile.entry(unsafe=True)`` kernels (the interpreter checks bounds)."""
    target, index_tiles, _, mask_tile = _access(fe, node, "gather", tensor, indices, [], mask, writes=False)
    if not isinstance(padding, _NUMBER):
        raise fe.type_error(f"gather's padding must be a number, got {fe.describe(padding)}", node)
    try:
        padding = constant_value(padding, target.type.dtype)  # type: ignore[attr-defined]
    except RuleError as exc:
        raise fe.type_error(f"gather's padding: {exc}", node) from None
    attrs = {"has_mask": mask_tile is not None, "padding": padding, **_hint_attrs(fe, node, latency, None)}
    operands = [target, *index_tiles, *([mask_tile] if mask_tile is not None else [])]
    return fe.op("gather", operands, attrs, node=node).result


@builtin
def scatter(fe: FrontEnd, node: ast.Call, tensor: Any, indices: Any, value: Any, mask: Any = None,
            latency: int | None = None) -> None:
    """Writes ``value`` into the Mut ``tensor`` at ``indices`` where ``mask`` holds.
    Only in ``@cutile.entry(unsafe=True)`` kernels (the interpreter checks bounds and races)."""
    target, index_tiles, values, mask_tile = _access(fe, node, "scatter", tensor, indices, [(value, "value")], mask,
                                                     writes=True)
    attrs = {"has_mask": mask_tile is not None, **_hint_attrs(fe, node, latency, None)}
    fe.op("scatter", [target, *index_tiles, *values, *([mask_tile] if mask_tile is not None else [])], attrs, node=node)
    return None


def _atomic(mode: str, fe: FrontEnd, node: ast.Call, tensor: Any, indices: Any, value: Any, mask: Any = None,
            order: str = "relaxed", scope: str = "device") -> Value:
    name = f"atomic_{mode}"
    target, index_tiles, values, mask_tile = _access(fe, node, name, tensor, indices, [(value, "value")], mask,
                                                     writes=True)
    attrs = {"mode": mode, "has_mask": mask_tile is not None, "order": order, "scope": scope}
    operands = [target, *index_tiles, *values, *([mask_tile] if mask_tile is not None else [])]
    return fe.op("atomic_rmw", operands, attrs, node=node).result


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
    return fe.op("atomic_cas", operands, attrs, node=node).result


def _own_tile_access(fe: FrontEnd, node: ast.Call, tensor: Value) -> tuple[list[Value], Value]:
    """The element indices of this block's own tile of a Mut tensor, and the mask of
    those inside the tensor."""
    ttype = tensor.type
    assert isinstance(ttype, TensorType) and ttype.tile_shape is not None
    shape = ttype.tile_shape
    indices: list[Value] = []
    inside: Value | None = None
    for axis, extent in enumerate(shape):
        iota = fe.op("iota", [], {"type": TileType(dt.i32, (extent,))}, node=node).result
        start = fe.op("mul", [fe.block_id(axis), fe.constant(extent, dt.i32, node=node)], node=node).result
        line = fe.op("add", [iota, fe.broadcast_to(start, (extent,), node)], node=node).result
        along = tuple(extent if k == axis else 1 for k in range(len(shape)))
        index = fe.broadcast_to(fe.op("reshape", [line], {"shape": along}, node=node).result, shape, node)
        dim = fe.op("tensor_dim", [tensor], {"axis": axis}, node=node).result
        below = fe.op("lt", [index, fe.broadcast_to(dim, shape, node)], node=node).result
        inside = below if inside is None else fe.op("and", [inside, below], node=node).result
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
        return fe.op("atomic_rmw", [tensor, *indices, *values, inside], attrs, node=node).result
    return impl


def _own_atomic_cas(fe: FrontEnd, node: ast.Call, tensor: Value, expected: Any, value: Any, order: Any = "relaxed",
                    scope: Any = "device") -> Value:
    values = _own_values(fe, node, tensor, [(expected, "expected value"), (value, "value")], "atomic_cas")
    indices, inside = _own_tile_access(fe, node, tensor)
    attrs = {"has_mask": True, "order": order, "scope": scope}
    return fe.op("atomic_cas", [tensor, *indices, *values, inside], attrs, node=node).result


# -- debugging ---------------------------------------------------------------------------------
def _print(fe: FrontEnd, node: ast.Call, args: Sequence[Any], kwargs: dict[str, Any], end: str) -> None:
    from cutile_compiler._opdefs.debug import parse_format

    unknown = sorted(set(kwargs) - {"end"})
    if unknown:
        raise fe.type_error(f"print() in a kernel takes only end= as a keyword, got {', '.join(unknown)}", node)
    end = kwargs.get("end", end)
    if not isinstance(end, str):
        raise fe.type_error(f"print()'s end must be a constant string, got {fe.describe(end)}", node)
    if not args or not isinstance(args[0], str):
        raise fe.type_error(
            "print() in a kernel takes a constant format string first, then the values it formats, e.g. "
            'print("x = %f, i = %d", x, i)', node)
    try:
        parts = parse_format(args[0] + end.replace("%", "%%"))
    except RuleError as exc:
        raise fe.type_error(str(exc), node) from None
    values = [fe.to_tile(v, node, what=f"print's value {i + 1}") for i, v in enumerate(args[1:])]
    fe.op("print", values, {"parts": tuple(parts)}, node=node)
    return None


@builtin
def printf(fe: FrontEnd, node: ast.Call, format: Any, *values: Any) -> None:
    """Prints ``format`` (C printf conversions %d %i %u %o %x %X %c %e %E %f %F %g %G,
    with flags, width and precision) with ``values`` (scalars or tiles; a tile prints
    as ``[a, b, ...]``), without adding a newline. Python's ``print(format, *values)``
    does the same and ends the line."""
    return _print(fe, node, [format, *values], {}, "")


@builtin
def assume(fe: FrontEnd, node: ast.Call, x: Any, div_by: Any = None, lower: Any = None, upper: Any = None) -> Value:
    """x, with facts the compiler may rely on: every element is a multiple of
    ``div_by`` (a power of two) and lies in [lower, upper]. Wrong facts make wrong
    GPU code; the interpreter checks them."""
    value = _tile(fe, x, node, "assume's value")
    attrs: dict[str, Any] = {}
    for name, fact in (("div_by", div_by), ("lower", lower), ("upper", upper)):
        if fact is not None:
            attrs[name] = _static_int(fe, fact, node, f"assume's {name}")
    return fe.op("assume", [value], attrs, node=node).result


# -- compile time ------------------------------------------------------------------------------
@builtin
def static_assert(fe: FrontEnd, node: ast.Call, condition: Any, message: Any = "") -> None:
    """Fails compilation when a compile-time condition is false."""
    if isinstance(condition, Value):
        raise fe.type_error("static_assert needs a compile-time condition (constants and shapes only)", node)
    if not condition:
        said = message if isinstance(message, str) else bounded_repr(message)
        raise fe.type_error(f"static_assert failed{': ' + said if message else ''}", node)
    return None


class _StaticRange:
    """``for i in static_range(stop)`` or ``static_range(start, stop[, step])``: a loop
    over compile-time int bounds, unrolled at compile time (each iteration is a copy
    of the body, so ``i`` is a compile-time int)."""

    __name__ = __qualname__ = "static_range"
    __module__ = "cutile_compiler.language"

    def __init__(self) -> None:
        DSL_FUNCTIONS[self.__name__] = self

    def __call__(self, *bounds: int) -> range:
        return range(*bounds)

    def __repr__(self) -> str:
        return "<cutile static_range>"


static_range = _StaticRange()

#: The most items a compile-time range may have (each is a copy of a loop body, or
#: of a tuple's item, made by the compiler).
MAX_STATIC_ITEMS = 1 << 16


def static_items(fe: FrontEnd, node: ast.AST, name: str, bounds: Sequence[Any]) -> tuple[int, ...]:
    """The items of ``range(*bounds)`` at compile time (``name`` is the function the
    kernel called): bounds that Python's range refuses (a zero step, floats...) and
    ranges of more than `MAX_STATIC_ITEMS` are `TileTypeError`s at ``node``."""
    def spelled() -> str:
        return f"{name}({', '.join(bounded_repr(b) for b in bounds)})"

    if not 1 <= len(bounds) <= 3:
        raise fe.type_error(f"{name}() takes 1 to 3 arguments, got {len(bounds)}", node)
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
        raise fe.type_error(f"{spelled()}: {name}() needs compile-time int bounds", node)
    items: range = fe.fold(range, bounds, spelled, node)
    if len(items) > MAX_STATIC_ITEMS:
        raise fe.type_error(f"{spelled()} has {len(items)} items; a compile-time range has at most "
                            f"{MAX_STATIC_ITEMS} (use range(...) with a run-time loop)", node)
    return tuple(items)


# -- methods of values ----------------------------------------------------------------------------
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
                 latency: Any = None, allow_tma: Any = None) -> Value:
    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    if index is None and shape is None:
        if ttype.tile_shape is None:
            raise fe.type_error("load() without an index loads a Mut tensor's own tile; this tensor is read-only: "
                                "use load(index=..., shape=...) or .partition(...)", node)
        return fe.op("tile_load", [fe.own_partition(tensor, node), *fe.own_index(tensor)],
                     _hint_attrs(fe, node, latency, allow_tma), node=node).result
    if index is None or shape is None:
        raise fe.type_error("load() takes both index= and shape= (or neither, for a Mut tensor's own tile)", node)
    result: Value = load.impl(fe, node, tensor, index, shape, padding, latency, allow_tma)
    return result


def _tensor_store(fe: FrontEnd, node: ast.Call, tensor: Value, value: Any) -> None:
    (tile,) = _own_values(fe, node, tensor, [(value, "value")], "store")
    fe.op("tile_store", [fe.own_partition(tensor, node), *fe.own_index(tensor), tile], node=node)
    return None


def _tensor_partition(fe: FrontEnd, node: ast.Call, tensor: Value, shape: Any, padding: Any = "zero") -> Value:
    return _partition(fe, tensor, shape, padding, node)  # which refuses a Mut tensor's in a safe kernel


def _partition_load(fe: FrontEnd, node: ast.Call, partition: Value, index: Any, latency: Any = None,
                    allow_tma: Any = None) -> Value:
    ptype = partition.type
    assert isinstance(ptype, PartitionType)
    return fe.op("tile_load", [partition, *_index(fe, index, node)],
                 _hint_attrs(fe, node, latency, allow_tma), node=node).result


def _partition_store(fe: FrontEnd, node: ast.Call, partition: Value, index: Any, value: Any) -> None:
    ptype = partition.type
    assert isinstance(ptype, PartitionType)
    if not fe.unsafe:
        raise fe.type_error("storing at an arbitrary tile index needs @cutile.entry(unsafe=True); a safe kernel "
                            "writes only its own tile, with .store() on the Mut tensor", node)
    tile = _convert_value(fe, value, ptype.tensor.dtype, node, "store's value")
    fe.op("tile_store", [partition, *_index(fe, index, node), tile], node=node)
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
        fe.op("tile_atomic", [partition, *_index(fe, index, node), tile],
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
    "extract": _bind_builtin(extract),
}
_TENSOR_METHODS: dict[str, Impl] = {
    "load": _tensor_load, "store": _tensor_store, "partition": _tensor_partition,
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
            return fe.fold(builtins.min if kind == "min" else builtins.max, (args,),
                           lambda: f"{kind}{bounded_repr(tuple(args))}", node)
        result = args[0]
        for a in args[1:]:
            x, y = fe.unify([result, a], node, f"{kind}()")
            result = fe.op("minimum" if kind == "min" else "maximum", [x, y], node=node).result
        return result
    return impl


def _py_abs(fe: FrontEnd, node: ast.Call, x: Any) -> Any:
    if isinstance(x, _NUMBER):
        return fe.fold(abs, (x,), lambda: f"abs({bounded_repr(x)})", node)
    return fe.op("abs", [_tile(fe, x, node, "abs's argument")], node=node).result


def _py_convert(kind: type, dtype: dt.DType) -> Impl:
    def impl(fe: FrontEnd, node: ast.Call, x: Any) -> Any:
        if isinstance(x, _NUMBER) or kind is float and isinstance(x, str):  # float("inf"), float("nan")
            return fe.fold(kind, (x,), lambda: f"{kind.__name__}({bounded_repr(x)})", node)
        return fe.cast(_tile(fe, x, node, f"{kind.__name__}()'s argument"), dtype, node)
    return impl


def _py_len(fe: FrontEnd, node: ast.Call, x: Any) -> int:
    if isinstance(x, tuple):
        return len(x)
    raise fe.type_error(f"len() takes a tuple inside a kernel, got {fe.describe(x)}", node)


def _py_range(fe: FrontEnd, node: ast.Call, *args: Any) -> Any:
    if all(isinstance(a, int) for a in args):
        return static_items(fe, node, "range", args)
    raise fe.syntax_error("range() with run-time bounds is only allowed as the iterable of a for loop", node)


_PYTHON_BUILTINS: dict[Any, Impl] = {
    builtins.min: _py_min_max("min"), builtins.max: _py_min_max("max"), builtins.abs: _py_abs,
    builtins.int: _py_convert(int, dt.i32), builtins.float: _py_convert(float, dt.f32),
    builtins.bool: _py_convert(bool, dt.bool_), builtins.len: _py_len, builtins.range: _py_range,
}


def call_object(fe: FrontEnd, callee: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> Any:
    """Emits a call of ``callee`` found in a kernel."""
    from cutile_compiler._frontend import KernelLambda

    if isinstance(callee, Builtin):
        return callee.emit(fe, node, args, kwargs)
    if isinstance(callee, BoundMethod):
        return callee.emit(fe, node, args, kwargs)
    if isinstance(callee, DeviceFunction):
        return fe.inline(callee.python_function, args, kwargs, node)
    if isinstance(callee, KernelLambda):
        return fe.call_lambda(callee, args, kwargs, node)
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
        return _print(fe, node, args, kwargs, "\n")
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
